"""Learning from the episode log: the data it trains on, the scenarios it practises, the trainers
(`backends/`), the worker daemon and the policy endpoint (`gateway/`). The log itself is `episodes`."""
