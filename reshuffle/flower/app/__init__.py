"""The project's own Flower apps and their tooling, over the drop-in (:mod:`reshuffle.flower`).

``server_app`` and ``client_app`` are the apps ``flwr run .`` starts (the simulator's
FL round, datasets and models on Flower); ``common`` their shared run-config settings;
``local`` the local SuperLink and simulation home ``make flower`` uses; ``soak`` the
fault soak on a real deployment; ``loopback`` an in-process Grid for tests and benches.
"""
