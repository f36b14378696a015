package controllers

import (
	"github.com/google/wire"
)

// ProviderSet is the controller layer.
var ProviderSet = wire.NewSet(NewTxController, NewAdminController)
