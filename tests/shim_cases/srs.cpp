// Accumulator shift-round-saturate and wrap-around.  Reads commands from stdin, one per line:
//   srs <acc> <rounding> <saturation> <out_type> <shift> <lane_value>
//       -> lane value set exactly, printed after to_vector<out_type>(shift)
//   fromvec <acc> <shift> <int32_value>          -> lane after from_vector(v, shift)
//   mac <acc> <a:int16> <b:int16> <count>        -> lane after count x mac(acc, a, b)
//   mac32 <acc> <a:int32> <b:int16> <count>      -> same with int32 x int16 operands
//   add <acc> <x> <y>                            -> lane after aie::add of two accumulators
//   bits <acc>                                   -> native lane width
#include "common.hpp"

int main() {
    std::string cmd;
    while (std::cin >> cmd) {
        if (cmd == "srs") {
            std::string acc, rnd, sat, ty, val;
            int shift;
            std::cin >> acc >> rnd >> sat >> ty >> shift >> val;
            aie::set_rounding(parse_rounding(rnd));
            aie::set_saturation(parse_saturation(sat));
            with_acc_tag(acc, [&](auto tag) {
                using Tag = decltype(tag);
                aie::accum<Tag, 8> a = aie::zeros<Tag, 8>();
                aieflow_shim::set_lane(a, 3, parse_i128(val));
                with_int_type(ty, [&](auto t) {
                    using T = decltype(t);
                    aie::vector<T, 8> v = a.template to_vector<T>(shift);
                    std::printf("%lld\n", static_cast<long long>(v[3]));
                });
            });
            aieflow_shim::reset_modes();
        } else if (cmd == "fromvec") {
            std::string acc;
            int shift;
            long long x;
            std::cin >> acc >> shift >> x;
            with_acc_tag(acc, [&](auto tag) {
                using Tag = decltype(tag);
                aie::vector<int32, 8> v = aie::broadcast<int32, 8>(static_cast<int32>(x));
                aie::accum<Tag, 8> a;
                a.from_vector(v, shift);
                std::printf("%s\n", i128_str(static_cast<i128>(a[5])).c_str());
            });
        } else if (cmd == "mac" || cmd == "mac32") {
            std::string acc;
            long long x, y, count;
            std::cin >> acc >> x >> y >> count;
            with_acc_tag(acc, [&](auto tag) {
                using Tag = decltype(tag);
                aie::accum<Tag, 16> a = aie::zeros<Tag, 16>();
                const auto b = aie::broadcast<int16, 16>(static_cast<int16>(y));
                if (cmd == "mac") {
                    const auto av = aie::broadcast<int16, 16>(static_cast<int16>(x));
                    for (long long i = 0; i < count; ++i) a = aie::mac(a, av, b);
                } else {
                    const auto av = aie::broadcast<int32, 16>(static_cast<int32>(x));
                    for (long long i = 0; i < count; ++i) a = aie::mac(a, av, b);
                }
                std::printf("%s\n", i128_str(static_cast<i128>(a.get(7))).c_str());
            });
        } else if (cmd == "add") {
            std::string acc, x, y;
            std::cin >> acc >> x >> y;
            with_acc_tag(acc, [&](auto tag) {
                using Tag = decltype(tag);
                aie::accum<Tag, 4> a, b;
                aieflow_shim::set_lane(a, 1, parse_i128(x));
                aieflow_shim::set_lane(b, 1, parse_i128(y));
                std::printf("%s\n", i128_str(static_cast<i128>(aie::add(a, b)[1])).c_str());
            });
        } else if (cmd == "bits") {
            std::string acc;
            std::cin >> acc;
            with_acc_tag(acc, [&](auto tag) {
                using Tag = decltype(tag);
                std::printf("%u\n", aie::accum<Tag, 4>::lane_bits);
            });
        } else {
            std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
            return 2;
        }
    }
    // Modes are back at the reset state after every srs line.
    return (aie::get_rounding() == aie::rounding_mode::floor &&
            aie::get_saturation() == aie::saturation_mode::none)
               ? 0
               : 3;
}
