// Interface of the tiled_matmul lab. The grader force-includes this header when it compiles
// your file, so the launcher you write must match this prototype exactly.
#pragma once

// P = M * N for square, row-major width x width matrices of float; width is a multiple of 16.
// M, N and P are device pointers. Launch your kernel(s) on the default stream and return;
// do not free or reallocate M, N or P.
extern "C" void matmul(const float* M, const float* N, float* P, int width);
