"""The web app's views: Gradio adapters over the library (widget values → library call → display value).

``backend`` holds the models, the shared switch library and the compute thread;
``widgets`` turns widget values into library arguments and results into display
values; ``steer``, ``train``, ``lens`` hold one handler per event; ``layout`` builds
the ``gr.Blocks`` page and wires events to handlers. ``app.py`` at the top of the
repository starts it.
"""
