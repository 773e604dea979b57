#include "fabric/fabric.h"

namespace zipccl {
namespace net {

FabricDecision decide(const Fabric&, const Settings& s, bool) {
  FabricDecision d;
  if (!s.net_inner.empty()) {
    d.action = FabricAction::kWrap;
    d.inner = s.net_inner;
    d.explicit_choice = true;
  } else if (s.transport == TransportChoice::kIb) {
    d.action = FabricAction::kIb;
    d.explicit_choice = true;
  }
  return d;
}

const Fabric& node_fabric() {
  static const Fabric f = discover_fabric("");
  return f;
}
const FabricDecision& node_decision() {
  static const FabricDecision d = decide(node_fabric(), settings(), false);
  return d;
}

}  // namespace net
}  // namespace zipccl
