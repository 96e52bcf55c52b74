"""The local dashboard: its static page, the JSON API the page uses, and who may use it (the guard)."""
