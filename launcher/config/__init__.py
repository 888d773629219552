"""What a run is configured with, validated on the laptop before a host is touched: profiles and the
environment variables a run may carry."""
