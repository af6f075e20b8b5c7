"""Where fastdata meets other frameworks from above: timm's ``create_dataset``/``create_loader`` (:mod:`.timm`).

Lightning and Accelerate need no module here: ``DataLoaderX`` is a ``DataLoader``, and its answer to Accelerate's
``prepare()`` lives with it in :mod:`fastdata.loader`.
"""
