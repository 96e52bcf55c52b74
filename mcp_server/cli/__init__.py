"""The `rlide` command line: its commands, `rlide doctor` and `rlide install` (client registration)."""
