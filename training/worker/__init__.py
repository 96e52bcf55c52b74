"""The training worker daemon: its loop, config, run lock and outcome, and the status and reward
chart it reads back from the log."""
