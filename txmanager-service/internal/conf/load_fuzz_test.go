package conf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// FuzzConfigLoad: a configuration file, however mangled, is refused with an error or gives
// a Bootstrap that passes Check; Load never panics and never hands main an invalid config.
func FuzzConfigLoad(f *testing.F) {
	if repo, err := os.ReadFile("defaults.yaml"); err == nil {
		f.Add(repo)
	}
	for _, seed := range []string{
		"",
		"writer:\n  workers: 3\nlease:\n  duration: 20s\nnonce:\n  chainQuery:\n    enabled: false\n",
		"lease:\n  renewInterval: 6s\n",
		"lease:\n  duration: soon\n",
		"lease:\n  duration: -5s\n  renewInterval: 9223372036854775807\n",
		"routing:\n  mode: random\n  maxHops: 99\n",
		"database:\n  queryExecMode: turbo\n  maxConns: -1\n",
		"environment: production\nsigners:\n  rawKeys: [\"0x01\"]\n",
		"server:\n  maxBodyBytes: 1\n",
		"server:\n  maxBodyBytes: 1e400\n",
		"create:\n  gasEstimateMultiplier: .nan\n",
		"stuck:\n  action: CANCEL\n",
		"fees:\n  maxFeePerGas: \"-1\"\n  bumpPercent: 9\n",
		"node:\n  id: \"${NODE_ID:${HTTP_ADDR}}\"\n",
		"server:\n  http:\n    addr: \"${NOT_A_VARIABLE}\"\n",
		"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n",
		"writer: [1, 2, 3]\n",
		"writer: 7\n",
		"- 1\n- 2\n",
		"{\"lease\": {\"duration\": \"20s\"}}",
		"\t: :\n",
		"lease:\n  duration: 10s\nlease:\n  duration: 20s\n",
		strings.Repeat("[", 500),
		"\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	// One file per fuzzing process, rewritten by each (sequential) iteration; the .yaml
	// extension is how the file source picks its decoder.
	path := filepath.Join(f.TempDir(), "config.yaml")
	f.Fuzz(func(t *testing.T, yaml []byte) {
		if err := os.WriteFile(path, yaml, 0o600); err != nil {
			t.Fatal(err)
		}
		bc, err := conf.Load(path)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("Load failed without saying why")
			}
			return
		}
		if bc == nil {
			t.Fatal("Load returned neither a configuration nor an error")
		}
		if err := bc.Check(); err != nil {
			t.Fatalf("Load accepted a configuration that Check refuses: %v", err)
		}
	})
}
