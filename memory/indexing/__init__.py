"""What goes into a workspace index: the file walk, chunking, code tokens, per-file preparation and
incremental sync."""
