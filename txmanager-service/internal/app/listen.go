package app

import (
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/server"
)

// Listen binds the configured server addresses before anything else starts and records the
// bound ports in bc, so the node registry, the banner and a derived node id see where the
// node really listens (a configured port 0 becomes the kernel's choice).
func Listen(bc *conf.Bootstrap) (*server.Listeners, error) {
	listeners, err := server.Listen(bc.Server)
	if err != nil {
		return nil, err
	}
	if err := bc.UseBoundPorts(listeners.Ports()); err != nil {
		_ = listeners.Close()
		return nil, err
	}
	return listeners, nil
}
