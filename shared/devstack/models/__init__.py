"""Local models for development and tests: synthetic tasks (`tasks`) and the tiny model builder (`build`).

`tasks` is pure Python; `build` needs torch and transformers and is imported only when used.
"""
