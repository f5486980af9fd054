"""pytest plugin (``-p plugin_unknown_cpu``): devices fail their probe as on a
CPU the bundled PoCL does not know, for the whole run (see fake_unknown_cpu)."""

import fake_unknown_cpu

fake_unknown_cpu.install()
