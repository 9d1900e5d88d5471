"""Platform connectors (Twitch, Bilibili, YouTube) and the bridge that publishes their chat."""
