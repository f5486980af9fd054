## Common prelude: precision pragmas and the real/accumulator types.
## Usage:  <%namespace name="common" file="/common/prelude.cl"/>  ${common.prelude(real="float")}
<%def name="prelude(real='float')">
<%
    if real not in ("float", "double"):
        raise ValueError("prelude: real must be 'float' or 'double', got %r" % (real,))
    if real == "double" and not dev.fp64:
        raise ValueError("prelude: real='double' on a device without fp64")
%>
% if dev.fp64:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
typedef ${real} real_t;
// Accumulator for sums of many terms: double where the device has it;
// otherwise float with compensation (see reduce.cl).
% if dev.fp64:
#define CLPHYS_HAVE_FP64 1
% endif
</%def>
