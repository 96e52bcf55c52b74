"""Tasks the policy practises, checked by running code: scenario sets and verifiers, workspace
snapshots, the sandbox runner, self-play rollouts, task files and held-out eval."""
