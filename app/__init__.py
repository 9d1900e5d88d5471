"""The application: the CLI, the stage supervisor, playback, re-execution, export, inspection."""
