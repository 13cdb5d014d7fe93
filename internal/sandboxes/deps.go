package sandboxes

import (
	"log/slog"

	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/templates"
)

// ProductDeps is what each product built on sandboxes (apps, functions, databases, schedules) is
// configured with: the store, the sandbox service, the template service and a logger (nil:
// slog.Default()). Their Configs embed it.
type ProductDeps struct {
	Store     *store.Store
	Sandboxes *Service
	Templates *templates.Service
	Logger    *slog.Logger
}
