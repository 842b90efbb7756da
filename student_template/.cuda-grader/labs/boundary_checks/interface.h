// Interface of the boundary_checks lab. The grader force-includes this header when it compiles
// your file, so the launcher you write must match this prototype exactly.
#pragma once

// P = M * N for rectangular, row-major matrices of float: M is m x n, N is n x k, P is m x k.
// m, n and k are any sizes >= 1, usually not multiples of your tile width.
// M, N and P are device pointers. Launch your kernel(s) on the default stream and return;
// do not free or reallocate M, N or P, and touch no element outside them.
extern "C" void matmul_rect(const float* M, const float* N, float* P, int m, int n, int k);
