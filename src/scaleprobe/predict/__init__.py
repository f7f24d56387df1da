"""The prediction model, torch-free: a multi-rank step predicted from one measured run.

    costmodel   communication per step (alpha-beta), efficiency, the slowest link for a target
    timeline    one data-parallel step laid out from measured compute and gradient buckets
    fluid       transfers that share one link
    stepmodel   many steps of the timeline, ranks waiting for the slowest
    sample      what the step model reads from one measured run
    whatif      a run's step predicted for other process counts, hosts, links, strategies
    memmodel    memory per rank for a strategy, world size and batch
    plan        the configurations that fit, with their predicted step and cost
    check       every measured multi-rank run beside its prediction
    fit         alpha-beta fits of the collectives benchmark's points"""
