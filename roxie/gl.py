"""Headless OpenGL for MuJoCo's renderer: which backend works here.

Used by `roxie play` (videos) and by pixel observations
(`roxie.envs.PixelSpec`). Stdlib only at import, so probing can happen before
MuJoCo is imported.

EGL (Mesa's llvmpipe on a machine without a GPU) is tried first, then OSMesa;
`MUJOCO_GL=egl|osmesa` puts one first. Each is probed in a short subprocess,
since a failed GL import cannot be undone in-process. The probe runs once per
process (the answer is cached).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from typing import Optional

GL_BACKENDS = ('egl', 'osmesa')
# Debian/Ubuntu packages that provide each backend (Mesa, software rendering).
GL_PACKAGES = {
    'egl': ('libegl1', 'libegl-mesa0', 'libgl1-mesa-dri', 'libgl1'),
    'osmesa': ('libosmesa6',),
}

_PROBE = """
import mujoco
m = mujoco.MjModel.from_xml_string(
    '<mujoco><worldbody><geom size=".1"/></worldbody></mujoco>')
r = mujoco.Renderer(m, 16, 16)
d = mujoco.MjData(m)
mujoco.mj_forward(m, d)
r.update_scene(d)
assert r.render().shape == (16, 16, 3)
r.close()
"""
_chosen: Optional[str] = None
_failure: Optional[str] = None


class RenderingUnavailable(RuntimeError):
  """No headless OpenGL backend works here; the message says what to install."""


def _probe(backend: str) -> Optional[str]:
  """None if `backend` renders in a fresh process, else why not."""
  env = dict(os.environ, MUJOCO_GL=backend, PYOPENGL_PLATFORM=backend)
  try:
    with warnings.catch_warnings():  # JAX warns on fork; this one execs.
      warnings.filterwarnings('ignore', message='os.fork',
                              category=RuntimeWarning)
      proc = subprocess.run([sys.executable, '-c', _PROBE], env=env,
                            capture_output=True, text=True, timeout=120,
                            check=False)
  except (OSError, subprocess.TimeoutExpired) as e:
    return str(e)
  if proc.returncode == 0:
    return None
  lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
  return lines[-1] if lines else f'exit code {proc.returncode}'


def install_hint() -> str:
  """The apt-get commands that make headless rendering work (Debian/Ubuntu)."""
  return (f'Install Mesa\'s EGL: `apt-get install '
          f'{" ".join(GL_PACKAGES["egl"])}`, or OSMesa: `apt-get install '
          f'{" ".join(GL_PACKAGES["osmesa"])}` (Debian/Ubuntu package names).')


def gl_backend() -> str:
  """The headless GL backend to render with, activated in this process.

  Returns:
    'egl' or 'osmesa'.

  Raises:
    RenderingUnavailable: neither works; the message names the system
      packages to install.
  """
  global _chosen, _failure
  if _chosen:
    return _chosen
  if _failure:
    raise RenderingUnavailable(_failure)
  preferred = os.environ.get('MUJOCO_GL', '').strip().lower()
  order = sorted(GL_BACKENDS, key=lambda b: b != preferred)
  reasons = {}
  for backend in order:
    reason = _probe(backend)
    if reason is None:
      _activate(backend)
      _chosen = backend
      return backend
    reasons[backend] = reason
  tried = '; '.join(f'{b}: {r}' for b, r in reasons.items())
  _failure = ('No headless OpenGL backend works here, so MuJoCo cannot '
              f'render ({tried}). {install_hint()}')
  raise RenderingUnavailable(_failure)


def _activate(backend: str) -> None:
  """Makes `mujoco.Renderer` (and `gl_context()`) use `backend` here."""
  if 'mujoco' not in sys.modules:  # The cheap way: before mujoco decides.
    os.environ['MUJOCO_GL'] = backend
    os.environ.setdefault('PYOPENGL_PLATFORM', backend)
  import mujoco  # pylint: disable=g-import-not-at-top
  # mujoco picks its GLContext class from MUJOCO_GL when it is imported; an
  # earlier import (without MUJOCO_GL, or with a backend that failed the
  # probe) is redirected here. The Renderer looks the class up on each init.
  holder = getattr(sys.modules[mujoco.Renderer.__module__], 'gl_context',
                   None)
  if holder is None:
    return
  os.environ.setdefault('PYOPENGL_PLATFORM', backend)
  try:
    wanted = importlib.import_module(f'mujoco.{backend}').GLContext
  except (ImportError, AttributeError, OSError) as e:
    raise RenderingUnavailable(
        f'{backend} renders in a fresh process but cannot be set up in this '
        f'one, where OpenGL was already initialised for another platform '
        f'({e}); start Python with MUJOCO_GL={backend}.') from e
  if getattr(holder, 'GLContext', None) is not wanted:
    holder.GLContext = wanted


def gl_context_class():
  """The GLContext class of the active backend (after `gl_backend()`)."""
  import mujoco  # pylint: disable=g-import-not-at-top
  backend = gl_backend()
  holder = getattr(sys.modules[mujoco.Renderer.__module__], 'gl_context',
                   None)
  cls = getattr(holder, 'GLContext', None)
  if cls is None:
    cls = importlib.import_module(f'mujoco.{backend}').GLContext
  return cls
