// Element-wise vector operations.  stdin: two lines of 16 int8 values (a, b), one line of
// 16 int16 values (c).  Each output line is "<name> <values...>".
#include <vector>

#include "common.hpp"

template <typename T, unsigned N>
void show(const char* name, const aie::vector<T, N>& v) {
    std::printf("%s", name);
    for (unsigned i = 0; i < N; ++i) std::printf(" %lld", static_cast<long long>(v[i]));
    std::printf("\n");
}

int main() {
    std::vector<int> ia(16), ib(16), ic(16);
    for (auto& x : ia) std::cin >> x;
    for (auto& x : ib) std::cin >> x;
    for (auto& x : ic) std::cin >> x;
    aie::vector<int8, 16> a, b;
    aie::vector<int16, 16> c;
    for (unsigned i = 0; i < 16; ++i) {
        a[i] = static_cast<int8>(ia[i]);
        b.set(static_cast<int8>(ib[i]), i);
        c[i] = static_cast<int16>(ic[i]);
    }
    show("add", aie::add(a, b));
    show("sub", aie::sub(a, b));
    show("adds", aie::add(a, int8{100}));
    show("max", aie::max(a, b));
    show("min", aie::min(a, b));
    show("maxs", aie::max(a, int8{0}));
    show("mins", aie::min(a, int8{0}));
    show("neg", aie::neg(a));
    std::printf("reduce_add %d\n", static_cast<int>(aie::reduce_add(a)));
    std::printf("reduce_add16 %d\n", static_cast<int>(aie::reduce_add(c)));
    std::printf("reduce_max %d\n", static_cast<int>(aie::reduce_max(a)));
    std::printf("reduce_min %d\n", static_cast<int>(aie::reduce_min(a)));
    show("concat", aie::concat(a.extract<8>(1), b.extract<8>(0), a.extract<8>(0)));
    auto g = a.grow<32>(1);
    show("grow", g);
    auto ins = a;
    ins.insert(2, b.extract<4>(3));
    show("insert", ins);
    // mul / mac / msc (exact products, default accumulator) then plain floor/none SRS to int32
    auto acc = aie::mul(a, b);
    acc = aie::mac(acc, a, int8{-3});
    acc = aie::msc(acc, c, c.extract<16>(0));  // int16 x int16 into the int8 x int8 accumulator
    show("macc", acc.to_vector<int32>(0));
    auto acc2 = aie::mul(c, int16{-32768});
    acc2 = aie::add(acc2, aie::negmul(c, c));
    show("accadd", acc2.to_vector<int32>(0));
    show("zeros", aie::zeros<int16, 8>());
    show("bcast", aie::broadcast<int16, 8>(-5));
    return 0;
}
