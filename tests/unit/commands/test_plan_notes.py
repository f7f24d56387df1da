"""`scaleprobe plan`'s notes under its tables: once each, however many rows gave them."""

from scaleprobe.core.fmt import same_but_figures


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
    assert same_but_figures(notes, "each row's in --json") == [
        "fsdp: priced on loopback (0.8 MB, on 2 ranks: all-gather 0.923 ms) (and 2 more "
        "like it, with other figures: each row's in --json)",
        "idle link: 2.50 ms more",
        "fsdp: on its own 4 ranks"]


def _verified(devices, plan_link, here_link):
    return {"label": f"ddp {devices}x16", "strategy": "ddp", "devices": devices,
            "batch_per_device": 16, "plan_link": plan_link, "measured_s": 0.02,
            "measured_interval_s": (0.019, 0.021), "ratio": 1.0, "ratio_plan": 1.1,
            "within_goal": True, "goal": {"text": "predicted / measured: 1.00x"},
            "predicted_plan": {"value": 0.022, "interval": (0.02, 0.024), "link": here_link},
            "predicted_here": {"value": 0.02, "interval": (0.019, 0.021), "link": here_link}}


def test_verify_says_when_the_plan_was_for_another_link_than_the_one_here(capsys):
    """A plan for 10gbit verified on one host: both predictions in the verify table are for
    loopback (re-predicted like for like), which a reader comparing them with the plan's
    10gbit rows must be told. Said once; not for one device (no link), nor when the plan was
    for the link here."""
    from scaleprobe.commands.plan_show import print_verified

    print_verified([_verified(1, "10gbit", "loopback"), _verified(2, "10gbit", "loopback"),
                    _verified(4, "10gbit", "loopback")])
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("the plan's rows are predicted for 10gbit; the ranks here cross "
                     "loopback") == 1
    print_verified([_verified(1, "10gbit", "loopback"), _verified(2, "loopback", "loopback")])
    assert "the plan's rows are predicted for" not in capsys.readouterr().out
