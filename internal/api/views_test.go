package api

import v1 "github.com/pandastack/pandastack/internal/wire/v1"

// The names these tests have always used for the public objects (internal/wire/v1's).

type SandboxView = v1.Sandbox

type SnapshotView = v1.Snapshot

type VolumeView = v1.Volume

type AttachmentView = v1.VolumeAttachment

type TemplateView = v1.Template

type KeyView = v1.Key

type InfoView = v1.Info

const OwnerTeam, OwnerCatalog = v1.OwnerTeam, v1.OwnerCatalog
