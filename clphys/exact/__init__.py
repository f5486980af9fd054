"""Exact and closed-form reference results (NumPy only), used to validate the
OpenCL simulations: 2D Ising (Onsager, Kaufman, brute force), the
anti-correlated random walk, the noisy Kuramoto model and simple Langevin
equations, the exact 2D Ising density of states (Beale), and fractional Gaussian noise
and the binomial multifractal cascade for fluctuation analysis.  Conventions (k_B = 1, Hamiltonians, per-spin normalisation) are
stated in each submodule's docstring."""

from .dos import density_of_states
from .fractal import (
                      binomial_cascade,
                      binomial_cascade_h,
                      binomial_cascade_spectrum,
                      binomial_cascade_tau,
                      fgn_autocovariance,
                      fgn_davies_harte,
)
from .ising import (
                      BETA_C_3D,
                      TC_2D,
                      TC_3D,
                      IsingEnumeration,
                      IsingExact,
                      enumerate_lattice,
                      finite_lattice,
                      onsager_energy,
                      onsager_magnetization,
                      onsager_specific_heat,
)
from .kuramoto import (
                      bessel_i0,
                      bessel_i0e,
                      bessel_i1,
                      bessel_i1e,
                      bessel_ratio_i1_i0,
                      kuramoto_order_parameter,
                      kuramoto_subcritical_r2,
)
from .sde import (
                      free_brownian_variance,
                      ou_velocity_mean,
                      ou_velocity_second_moment,
                      overdamped_tilted_washboard_velocity,
                      washboard_stationary_sin_mean,
)
from .timeseries import acrw_increment_autocorrelation, acrw_increment_variance, acrw_msd, random_walk_hurst

__all__ = [
    "density_of_states", "BETA_C_3D", "TC_2D", "TC_3D", "IsingEnumeration", "IsingExact", "enumerate_lattice",
    "finite_lattice", "onsager_energy", "onsager_magnetization", "onsager_specific_heat",
    "bessel_i0", "bessel_i0e", "bessel_i1", "bessel_i1e", "bessel_ratio_i1_i0",
    "kuramoto_order_parameter", "kuramoto_subcritical_r2",
    "free_brownian_variance", "ou_velocity_mean", "ou_velocity_second_moment",
    "overdamped_tilted_washboard_velocity", "washboard_stationary_sin_mean",
    "acrw_increment_autocorrelation", "acrw_increment_variance", "acrw_msd",
    "random_walk_hurst", "fgn_autocovariance", "fgn_davies_harte", "binomial_cascade",
    "binomial_cascade_h", "binomial_cascade_tau", "binomial_cascade_spectrum",
]
