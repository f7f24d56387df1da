"""The run's configuration: one frozen dataclass per component (``runconfig``), each
key's type, default, help and range (``knobs``), the combinations of keys a run can have
(``rules``), the names ``--model`` and ``--dataset`` accept (``catalog``, with
``extras``: the optional libraries) and the example specs that come with scaleprobe
(``bundled``). No torch import (``catalog`` asks torchvision, and so torch, only
where a name must be checked against torchvision's own list); it checks itself against the
features' rules, the floor below."""
