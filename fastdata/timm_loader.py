"""Where ``fastdata.timm_loader`` was: timm's ``create_dataset``/``create_loader`` over a pack live in
:mod:`fastdata.integrations.timm` now. ``from fastdata.timm_loader import create_dataset, create_loader``
keeps working.
"""

from fastdata.integrations.timm import TimmLoader, create_dataset, create_loader

__all__ = ["TimmLoader", "create_dataset", "create_loader"]
