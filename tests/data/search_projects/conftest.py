"""The projects here are search test data (see README.md), not tests of this repository: collect nothing."""

collect_ignore_glob = ["*"]
