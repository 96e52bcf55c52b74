"""The policy endpoint: an OpenAI-compatible server that records every turn, and the engines that
sample behind it."""
