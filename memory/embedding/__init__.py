"""Text embeddings: the MiniLM graph on onnxruntime, the embedders and their cache."""
