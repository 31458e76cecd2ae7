"""The Gradio page. Importing this package imports no Gradio; demo.ui.app does."""
