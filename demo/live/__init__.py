"""The live layer: a race as the page shows it, without Gradio. Frames of display values from a
running race (race_stream), one race per browser session (session), and booth mode's show (booth).
Above the library (demo/*, demo/sweep), below the page (demo/ui), which maps it onto components."""
