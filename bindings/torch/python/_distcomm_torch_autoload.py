"""How torch finds "distcomm" with no import in the program, through the entry points of the
installed package (bindings/torch/pyproject.toml):

* torch.distributed.backends (torch 2.14 and later): torch loads the backend the moment a group
  asks for it by name (``init_process_group("distcomm")``, ``"cpu:distcomm"``), and only then;
* torch.backends (torch 2.5 and later, extension autoloading): torch calls it as it is imported;
  on a torch that has the first, it does nothing, and the first loads "distcomm" when asked.
  ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns torch's autoloading off.

A module of its own, outside the package, so that torch's import does not load the extension
where it need not, and a broken extension (built for another torch) never breaks ``import torch``.
"""

import warnings


def load():
    """Entry point of torch.distributed.backends: registers "distcomm" (errors propagate)."""
    import distcomm_torch

    distcomm_torch.register()


def autoload():
    """Entry point of torch.backends, called while torch is imported."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or hasattr(dist.Backend, "_ensure_backend_registered"):
            return  # none, or torch loads "distcomm" itself when a group asks for it
        load()
    except Exception as err:  # never fail torch's own import
        warnings.warn(f"distcomm_torch could not be loaded, so torch.distributed has no "
                      f"\"distcomm\" backend: {err} (reinstall it against this torch: "
                      f"pip install --no-build-isolation ./bindings/torch)", stacklevel=2)
