document.getElementById("app").textContent = "vite fixture built in " + import.meta.env.MODE + " mode";
