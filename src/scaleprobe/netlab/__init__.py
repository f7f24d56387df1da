"""The network lab: several "hosts" on one machine, in network namespaces joined by
shaped links (``netns``), a relay that adds latency where the kernel has no netem
(``delay``), and each rank of a run behind a cable of its own (``ranknet``, ``--link``)."""
