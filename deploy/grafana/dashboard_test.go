// Package grafana_test checks the dashboard's shape without a Grafana or Prometheus: it
// parses, every query panel has a query on the ${datasource} variable, titles and ids are
// unique. Every query is evaluated against a real Prometheus that scraped the service in
// txmanager-service/test/integration (TestDashboardQueriesAgainstPrometheus).
package grafana_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

type target struct {
	RefID      string     `json:"refId"`
	Expr       string     `json:"expr"`
	Datasource datasource `json:"datasource"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID      int      `json:"id"`
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row holds its panels
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("txmanager.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) {
		t.Fatal("txmanager.json is not valid JSON")
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	hasDatasourceVar := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDatasourceVar = true
		}
	}
	if !hasDatasourceVar {
		t.Error("want a Prometheus datasource variable named datasource")
	}

	titles := map[string]bool{}
	ids := map[int]bool{}
	queryPanels := 0
	var check func(p panel)
	check = func(p panel) {
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if titles[p.Title] {
			t.Errorf("title %q is used twice", p.Title)
		}
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		titles[p.Title], ids[p.ID] = true, true
		if p.Type == "row" {
			for _, child := range p.Panels {
				check(child)
			}
			return
		}
		queryPanels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		refIDs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s has an empty expr", p.Title, tg.RefID)
			}
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %s queries datasource %q, want ${datasource}", p.Title, tg.RefID, tg.Datasource.UID)
			}
			if tg.RefID == "" || refIDs[tg.RefID] {
				t.Errorf("panel %q: refId %q missing or repeated", p.Title, tg.RefID)
			}
			refIDs[tg.RefID] = true
		}
	}
	for _, p := range d.Panels {
		check(p)
	}
	if queryPanels == 0 {
		t.Fatal("no panels")
	}
	t.Logf("%d query panels, %d rows", queryPanels, len(titles)-queryPanels)
}
