"""Run under torchrun: Lightning trains on headrace's loaders (_lightning_train.py says how).

    lightning_train.py ROOT OUT first|resume VARIANT...

Lightning is imported only when this runs as the script: a HeadraceDataLoader's worker
processes import the script again (as ``__mp_main__``) and need none of Lightning, whose
import took most of a worker's start (17 s of 36 s for ``import lightning``, loaded 2c).
"""

if __name__ == "__main__":
    from _frameworks import script
    from _lightning_train import main

    script(main)
