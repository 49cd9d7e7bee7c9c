"""The Streamlit dashboard: ``main.py`` is the router, ``views/`` holds one thin page each."""
