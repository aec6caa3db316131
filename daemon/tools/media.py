"""Virtual media tools: the images on the board, the drive the target sees, file drops and the
files a target wrote. Uploads of whole images are a route (PUT /api/media/images/{name},
daemon/transports/media_http.py): a body that size does not belong in a tool call.

Policies: listing is a read; attaching, detaching, deleting and dropping change what the
target sees (write); reading the files back shows what the target saved, private like its
screen (a read that needs the token wherever a write does)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from daemon.catalog import CallContext, ToolSpec, object_schema
from daemon.errors import ToolError
from daemon.fat import DropFile
from daemon.media import MB, NAME_SCHEMA, MediaStore, check_name
from daemon.runtime import Runtime

MAX_READ = 4 * MB  # a file read back through a tool (base64 in a JSON reply)
_NAME = {"name": NAME_SCHEMA}
KEYWORDS = ("usb drive", "virtual media", "disk image", "files")


def _decode(files: list[dict[str, Any]]) -> list[DropFile]:
    out = []
    for f in files:
        try:
            data = base64.b64decode(f["content_base64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolError(
                "media_files_invalid", f"{f['name']!r}: content_base64 is not base64: {exc}"
            ) from exc
        out.append(DropFile(f["name"], data))
    return out


def tools(rt: Runtime) -> list[ToolSpec]:
    media: MediaStore | None = rt.media
    if media is None:
        return []
    store = media

    async def media_list(args: dict[str, Any], ctx: CallContext) -> Any:
        return {"images": store.images(), **store.status()}

    async def media_attach(args: dict[str, Any], ctx: CallContext) -> Any:
        cdrom = args["mode"] == "cdrom"
        return await store.attach(
            check_name(args["name"]), cdrom=cdrom, read_only=args["read_only"]
        )

    async def media_detach(args: dict[str, Any], ctx: CallContext) -> Any:
        return await store.detach(forced=args["force"])

    async def media_delete(args: dict[str, Any], ctx: CallContext) -> Any:
        await store.delete(check_name(args["name"]))
        return {"deleted": args["name"], **store.status()}

    async def media_drop(args: dict[str, Any], ctx: CallContext) -> Any:
        name = check_name(args["name"])
        made = await store.drop(
            name,
            _decode(args["files"]),
            free_bytes=int(args["free_mb"] * MB),
            read_only=args["read_only"],
        )
        out: dict[str, Any] = {**made.to_dict(), "files": len(args["files"])}
        if args["attach"]:
            out["drive"] = await store.attach(name, cdrom=False, read_only=args["read_only"])
        return out

    async def media_files(args: dict[str, Any], ctx: CallContext) -> Any:
        name = check_name(args["name"])
        return {"name": name, "files": await store.files(name)}

    async def media_file_read(args: dict[str, Any], ctx: CallContext) -> Any:
        name = check_name(args["name"])
        data, digest = await store.read(name, args["path"], MAX_READ)
        return {
            "name": name,
            "path": args["path"],
            "size": len(data),
            "sha256": digest,
            "content_base64": base64.b64encode(data).decode(),
        }

    drop_file = object_schema(
        {
            "name": {"type": "string", "minLength": 1, "maxLength": 255},
            "content_base64": {"type": "string", "contentEncoding": "base64"},
        },
        required=["name", "content_base64"],
    )

    async def not_a_tool(args: dict[str, Any], ctx: CallContext) -> Any:
        raise ToolError("tool_not_found", "media_upload is the route PUT /api/media/images/{name}")

    return [
        ToolSpec(
            # The upload route's record: its policy for the flight recorder, never callable.
            name="media_upload",
            description="Upload an image: PUT /api/media/images/{name} with the image as body.",
            policy="write",
            handler=not_a_tool,
            exposure="internal",
            category="media",
        ),
        ToolSpec(
            name="media_list",
            title="List virtual media",
            description="The disk images on the board, which one the target's USB drive holds "
            "(flash or CD-ROM, read-only or not), and the images' quota.",
            policy="read",
            handler=media_list,
            category="media",
            keywords=KEYWORDS,
        ),
        ToolSpec(
            name="media_attach",
            title="Attach an image as a USB drive",
            description="Put an image on the board into the target's USB drive: `flash` "
            "(a USB stick; writable unless read_only) or `cdrom` (always read-only). The "
            "drive must be empty.",
            policy="write",
            handler=media_attach,
            args_schema=object_schema(
                {
                    **_NAME,
                    "mode": {
                        "enum": ["flash", "cdrom"],
                        "default": "flash",
                        "description": "flash: a USB stick; cdrom: an optical drive (read-only; "
                        "the target re-enumerates when the mode changes)",
                    },
                    "read_only": {
                        "type": "boolean",
                        "default": False,
                        "description": "the target may read but not write the drive",
                    },
                },
                required=["name"],
            ),
            example_input={"name": "installer.iso", "mode": "cdrom"},
            category="media",
            keywords=KEYWORDS,
        ),
        ToolSpec(
            name="media_detach",
            title="Detach (eject) the USB drive's image",
            description="Take the image out of the target's drive. A target that locked it "
            "(a mounted drive) refuses with media_locked unless force is true, which ejects "
            "it at once as pulling a stick out would (unsaved writes on the target are lost).",
            policy="write",
            handler=media_detach,
            args_schema=object_schema(
                {
                    "force": {
                        "type": "boolean",
                        "default": False,
                        "description": "eject even while the target has locked the medium",
                    }
                }
            ),
            category="media",
            keywords=KEYWORDS,
        ),
        ToolSpec(
            name="media_delete",
            title="Delete an image",
            description="Delete an image from the board; the attached one is refused.",
            policy="write",
            handler=media_delete,
            args_schema=object_schema(_NAME, required=["name"]),
            example_input={"name": "old.img"},
            category="media",
            keywords=KEYWORDS,
        ),
        ToolSpec(
            name="media_drop",
            title="Hand the target files on a USB drive",
            description="Build a FAT drive holding exactly the given files (plus free_mb for "
            "the target to write to) and, unless attach is false, put it into the target's "
            "drive as a USB stick: a phone's Files app or a computer sees those files.",
            policy="write",
            handler=media_drop,
            args_schema=object_schema(
                {
                    "name": {**NAME_SCHEMA, "default": "drop.img"},
                    "files": {
                        "type": "array",
                        "items": drop_file,
                        "minItems": 1,
                        "maxItems": 256,
                        "description": "the files the drive holds, each a name and its "
                        "content in base64",
                    },
                    "free_mb": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 1024,
                        "default": 0,
                        "description": "room left on the drive for the target to write to",
                    },
                    "read_only": {
                        "type": "boolean",
                        "default": False,
                        "description": "the target may read but not write the drive",
                    },
                    "attach": {
                        "type": "boolean",
                        "default": True,
                        "description": "put the drive into the target's USB drive at once",
                    },
                },
                required=["files"],
            ),
            example_input={
                "files": [{"name": "hello.txt", "content_base64": "aGVsbG8K"}],
                "free_mb": 8,
            },
            category="media",
            keywords=KEYWORDS,
        ),
        ToolSpec(
            name="media_files",
            title="List the files on an image",
            description="The files on a FAT image, read without mounting: what a drop holds, "
            "or what the target saved on a writable drive once it is detached.",
            policy="read",
            private=True,
            handler=media_files,
            args_schema=object_schema(_NAME, required=["name"]),
            example_input={"name": "drop.img"},
            category="media",
            keywords=KEYWORDS,
        ),
        ToolSpec(
            name="media_file_read",
            title="Read a file from an image",
            description="One file from a FAT image (base64, with its sha256), at most 4 MB; "
            "the image must not be attached writable.",
            policy="read",
            private=True,
            handler=media_file_read,
            args_schema=object_schema(
                {
                    **_NAME,
                    "path": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 1024,
                        "description": "the file's path on the image, as media_files lists it",
                    },
                },
                required=["name", "path"],
            ),
            example_input={"name": "drop.img", "path": "saved.txt"},
            category="media",
            keywords=KEYWORDS,
        ),
    ]
