"""The load sweep (python -m demo load) and the what-if run (python -m demo whatif): N users per
side through one evaluator cell per step (engine), the page's view of a sweep (view), its figures
(figures), its files (page, png) and the what-if's steps (whatif). Their command lines are
demo/cli/load.py and demo/cli/whatif.py."""
