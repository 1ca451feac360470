"""Installed models, below every capability engine (it imports none of them):

- ``registry.py``: the JSON registry under ``<data_dir>/models/`` and what a model directory holds;
- ``catalogue.py``: the models ``khuluma models pull`` knows by a short name, their licences and published figures;
- ``install.py``: downloads, conversion to CTranslate2, registration;
- ``resolve.py``: the model a setting names, as a registry entry (never downloads);
- ``ctc_layout.py``: a CTC speech model directory's layout, told from its files.
"""
