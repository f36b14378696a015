package conf

import "time"

// Console configures the operator console served at /console (docs/console.md).
type Console struct {
	// Enabled serves the console; off, /console answers 404 like any unknown path.
	Enabled bool `json:"enabled"`
	// SessionSecretFile holds at least 32 bytes that seal session cookies. Every node of a
	// cluster behind one address needs the same secret, or a session opened on one node is
	// unknown to the others; empty makes a secret per process (sessions end on restart).
	SessionSecretFile string `json:"sessionSecretFile"`
	// SessionTTL: a session ends this long after sign-in. The credential it was opened
	// with is checked again on every request, so a removed key ends its sessions at once.
	SessionTTL Duration `json:"sessionTTL"`
	// IdleTimeout ends a session not used for this long (a browser left signed in on an
	// unattended machine), before its sessionTTL; pages refreshing themselves (the live
	// feed) do not count as use. 0 turns it off.
	IdleTimeout Duration `json:"idleTimeout"`
}

func (c Console) check(p *problems) {
	p.require(c.SessionTTL >= Duration(time.Minute) && c.SessionTTL <= Duration(7*24*time.Hour),
		"console.sessionTTL", "must be between 1m and 168h")
	p.require(c.IdleTimeout == 0 || (c.IdleTimeout >= Duration(time.Minute) && c.IdleTimeout <= c.SessionTTL),
		"console.idleTimeout", "must be 0 (off) or between 1m and console.sessionTTL")
}
