// Interface of the corner_turning lab. The grader force-includes this header when it compiles
// your file, so the launcher you write must match this prototype exactly.
#pragma once

// P = M * N for square width x width matrices of float; width is a multiple of 16.
// M and P are row-major: element (row, col) is at [row * width + col].
// N is stored COLUMN-major: element (row, col) of N is at N[col * width + row].
// M, N and P are device pointers. Launch your kernel(s) on the default stream and return;
// do not free or reallocate M, N or P.
extern "C" void matmul_colmajor(const float* M, const float* N, float* P, int width);
