// Hostile: template instantiation that grows exponentially; the compiler never finishes.
template <int N, unsigned long long K>
struct Bomb {
    static constexpr unsigned long long value = Bomb<N - 1, 2 * K>::value + Bomb<N - 1, 2 * K + 1>::value;
};
template <unsigned long long K>
struct Bomb<0, K> {
    static constexpr unsigned long long value = K;
};

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    static_assert(Bomb<40, 1>::value != 0, "never");
}
