package console

import "github.com/google/wire"

// ProviderSet is the operator console.
var ProviderSet = wire.NewSet(New)
