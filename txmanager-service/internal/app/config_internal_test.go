package app

import (
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
)

// The routing section maps onto the mode, the hop bound and the wait between attempts.
func TestRoutingSectionMapsOntoTheControllersRouting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode string
		want controllers.Routing
	}{
		{conf.RoutingForward, controllers.Routing{Forward: true, MaxHops: 2, RetryWait: 500 * time.Millisecond}},
		{conf.RoutingBasic, controllers.Routing{MaxHops: 2, RetryWait: 500 * time.Millisecond}},
	}
	for _, tt := range tests {
		got := newRouting(&conf.Bootstrap{Routing: conf.Routing{Mode: tt.mode, MaxHops: 2}})
		if got != tt.want {
			t.Errorf("mode %q: %+v, want %+v", tt.mode, got, tt.want)
		}
	}
}
