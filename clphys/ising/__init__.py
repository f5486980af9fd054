"""The Ising model on OpenCL devices: 2D and 3D Metropolis with several kernel
designs, ensembles of replicas in one launch, device-side observables, Binder
cumulant scans. See docs/ising.md.

    from clphys.ising import Ising2D, Ensemble2D, binder_scan, TC_2D
    lat = Ising2D(1024, TC_2D)            # multi-spin coded, Philox
    lat.sweep(1000)
    print(lat.energy(), abs(lat.magnetization()))
"""

from ..exact import BETA_C_3D, TC_2D, TC_3D, finite_lattice, onsager_energy, onsager_magnetization
from .backends import available as available_algorithms
from .binder import BinderScan, Crossing, binder_scan
from .lattice import Ensemble, Ensemble2D, Ensemble3D
from .samples import Samples
from .single import Ising2D, Ising3D
from .thresholds import metropolis_thresholds

__all__ = ["Ising2D", "Ising3D", "Ensemble", "Ensemble2D", "Ensemble3D", "Samples",
           "binder_scan", "BinderScan", "Crossing", "metropolis_thresholds",
           "available_algorithms", "TC_2D", "TC_3D", "BETA_C_3D", "finite_lattice",
           "onsager_energy", "onsager_magnetization"]
