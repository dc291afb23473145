// Type-check of graph.h (compiled with -fsyntax-only).
#include "graph.h"

TestGraph g;

int main() {
    g.init();
    g.update(g.scale, 3);
    g.run(4);
    g.wait();
    return g.end() == adf::return_code::ok ? 0 : 1;
}
