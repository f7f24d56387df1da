"""`scaleprobe plan`'s notes under its tables: once each, however many rows gave them."""

from scaleprobe.commands.plan_show import same_but_figures


def test_notes_that_differ_only_in_their_figures_are_said_once():
    """Bug caught: a plan over 2, 4 and 8 devices printed FSDP's collective note three
    times (one per device count, each with its own figures) and its shard-copy note twice,
    "0.1 ms added" and "0.0 ms added"."""
    notes = ["fsdp: priced on loopback (0.8 MB, on 2 ranks: all-gather 0.923 ms)",
             "idle link: 2.50 ms more",
             "fsdp: priced on loopback (0.8 MB, on 4 ranks: all-gather 1.76 ms)",
             "idle link: 2.50 ms more",
             "fsdp: priced on loopback (0.8 MB, on 8 ranks: all-gather 2.94 ms)",
             "fsdp: on its own 4 ranks"]
    assert same_but_figures(notes) == [
        "fsdp: priced on loopback (0.8 MB, on 2 ranks: all-gather 0.923 ms) (and 2 more "
        "like it, with other figures: each row's in --json)",
        "idle link: 2.50 ms more",
        "fsdp: on its own 4 ranks"]
