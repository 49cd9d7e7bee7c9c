"""Entry script of the dashboard (``faultlens dashboard`` runs it with ``streamlit run``)."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import auth, ui

st.set_page_config(page_title="faultlens", page_icon=ui.favicon(), layout="wide")
auth.gate()  # before any page or navigation: an unauthenticated visitor gets neither

PAGES = [
    st.Page(
        "views/overview.py",
        title="Overview",
        url_path="home",  # the default page is served at "/" (its own path is never shown)
        default=True,
        icon=":material/dashboard:",
    ),
    # "/overview" opens the overview too, not "Page not found" (a hidden alias of it)
    st.Page("views/overview.py", title="Overview", url_path="overview", visibility="hidden"),
    st.Page("views/events.py", title="Events", url_path="events", icon=":material/list:"),
    st.Page("views/node.py", title="Node", url_path="node", icon=":material/dns:"),
    st.Page("views/jobs.py", title="Jobs", url_path="jobs", icon=":material/work:"),
    st.Page(
        "views/predictions.py",
        title="Predictions",
        url_path="predictions",
        icon=":material/online_prediction:",
    ),
    st.Page(
        "views/stragglers.py", title="Stragglers", url_path="stragglers", icon=":material/speed:"
    ),
    st.Page(
        "views/recovery.py",
        title="Recovery what-if",
        url_path="recovery",
        icon=":material/restart_alt:",
    ),
    st.Page(
        "views/reliability.py",
        title="Reliability",
        url_path="reliability",
        icon=":material/timeline:",
    ),
    st.Page(
        "views/data_health.py",
        title="Data health",
        url_path="data-health",
        icon=":material/health_and_safety:",
    ),
]

page = st.navigation(PAGES)
ui.snapshot()  # every page needs the database: say what to run if there is none
page.run()
ui.first_run_done()  # the first page is drawn: the other pages' views are warmed from now
