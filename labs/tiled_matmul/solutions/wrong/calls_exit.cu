// Known wrong: the launcher ends the whole process.
#include <cstdlib>

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    exit(0);
}
