package api

import (
	"os"
	"testing"

	"github.com/pandastack/pandastack/internal/testenv"
)

// TestMain gives the package's test agents one store of bakes (testenv.BakeStore).
func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m)) }
