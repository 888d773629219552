"""Dashboard screens: the main screen and its modals (confirmation, help)."""
