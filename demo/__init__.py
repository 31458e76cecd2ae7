"""The speculative decoding demo and evaluator: the page, the race, the sweep and load, as a library.

Entry points: ``python app.py`` (the page) and ``python -m demo`` (the command line).
"""
