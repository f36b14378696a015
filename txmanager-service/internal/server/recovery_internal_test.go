package server

import (
	"context"
	"strings"
	"testing"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A panic below the transport is answered INTERNAL and logged with where it happened, and
// the request, which may carry a secret (here a webhook's signing secret), is in no log:
// not the service's, and not Kratos' global one. (Not parallel: it swaps the global logger.)
func TestAPanicIsLoggedWithoutItsRequest(t *testing.T) {
	const secret = "whsec-SIGNINGSECRET-0123456789"
	var serviceLog, globalLog testsupport.LogBuffer
	previous := log.GetLogger()
	log.SetLogger(log.NewStdLogger(&globalLog))
	t.Cleanup(func() { log.SetLogger(previous) })
	metrics := telemetry.Noop()
	mw, err := NewMiddleware(conf.Routing{}, tracenoop.NewTracerProvider(), metrics, &Authenticator{}, NewRateLimiter(conf.Server{}, metrics), log.NewStdLogger(&serviceLog))
	if err != nil {
		t.Fatal(err)
	}
	handler := middleware.Chain(mw.chain...)(func(context.Context, any) (any, error) { panic("nil map write in the webhook book") })
	_, err = handler(context.Background(), &v1.CreateWebhookRequest{Url: "https://hooks.example/x", Secret: secret})
	if se := kerrors.FromError(err); se == nil || se.Code != 500 {
		t.Fatalf("a panic answered %v, want INTERNAL (500)", err)
	}
	if !strings.Contains(serviceLog.String(), "nil map write in the webhook book") {
		t.Fatalf("the panic is not in the service's log:\n%s", serviceLog.String())
	}
	for name, text := range map[string]string{"service": serviceLog.String(), "global": globalLog.String()} {
		if strings.Contains(text, secret) {
			t.Errorf("the %s log carries the request's secret:\n%s", name, text)
		}
	}
}
