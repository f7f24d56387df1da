"""Model builders by name: torchvision classifiers, small CNNs, or the user's own function."""

from scaleprobe.models.build import build_model, list_models, param_count

__all__ = ["build_model", "list_models", "param_count"]
