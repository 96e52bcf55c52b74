"""Base models: the packaged offline ones (GGUF in pinned wheels, converted once) and resolving a name to a folder."""
