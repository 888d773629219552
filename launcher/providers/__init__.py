"""GPU clouds nsa-launch can rent hosts from (today: Prime Intellect, `prime.py`)."""
